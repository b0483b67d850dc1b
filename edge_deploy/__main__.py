from edge_deploy.cli import main

main()
