"""The reliability probes that live in their own modules (``bench/reliability.py --probes NAME`` runs one).

Each module here exposes ``run(args: argparse.Namespace) -> list[str]``: the lines of its table, built with
:mod:`probes.common`. Register it in ``bench/reliability.py``'s ``MODULE_PROBES``.
"""
