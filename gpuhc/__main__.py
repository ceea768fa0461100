from gpuhc.cli import main

main()
