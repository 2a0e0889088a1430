from trtverify.cli import main

main()
