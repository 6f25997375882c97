from detector.cli import main

raise SystemExit(main())
