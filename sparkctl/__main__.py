from sparkctl.cli.app import main

main()
