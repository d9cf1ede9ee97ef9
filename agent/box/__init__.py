"""The agent's side of the box: the Box contract (interface), the boxes (local: this machine; ssh: a host
reached over SSH), which one a command measures (choice), and the catalog of box-side tools a step may
call through one (catalog). The tools themselves live in tools/ and run on the box."""
