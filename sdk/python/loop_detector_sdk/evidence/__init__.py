"""The app's fingerprints of a model call: what loop-detector's SQL computes from content (normalized, hashed with
ClickHouse's own functions), computed where the content is, so that no text leaves the app.

* :mod:`.clickhouse_hash`: ``cityHash64`` and the SimHash functions, bit for bit;
* :mod:`.clickhouse_json`: JSON as ClickHouse's JSON functions read and re-serialize it;
* :mod:`.normalize`: the view's normalization of content;
* :mod:`.messages`: each library's messages in one neutral form;
* :mod:`.fingerprints`: the fingerprint set (version 3), as span attributes and as a check's ``evidence``;
* :mod:`.pending`: the ``evidence`` of a guard's check, never failing it.
"""
