from bisector.trust.start import main

if __name__ == "__main__":
    main()
