from scalestudy.cli import main

main()
