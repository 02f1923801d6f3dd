from chordpub.cli import main

main()
