from vastprobe.cli import main

main()
