from tilegraph.cli import main

main()
