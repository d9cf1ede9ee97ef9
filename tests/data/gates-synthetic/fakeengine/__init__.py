# This tree is source for the static scan only; importing it is a bug in the scanner.
raise ImportError("gates-synthetic is never imported: the gate scan must read it with ast")
