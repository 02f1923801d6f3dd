from chordpub.entry import main

main()
