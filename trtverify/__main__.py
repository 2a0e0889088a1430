from trtverify.cli.main import main

main()
