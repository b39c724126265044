from dojo.cli import main

main()
