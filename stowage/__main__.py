from stowage.cli import main

main()
