from detector.cli.main import main

raise SystemExit(main())
