"""Scripts the lead runs on the device machine (an H200): each checks, times against torch in one process, and prints a table last."""
