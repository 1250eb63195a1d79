from robo.cli import main

main()
