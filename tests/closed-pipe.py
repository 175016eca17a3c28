#!/usr/bin/env python3
"""closed-pipe.py ERR CMD [ARG...]: runs CMD with its stdout a pipe whose
reading end is closed before it starts, so that every write it makes meets
a reader gone (a reader that exits on its own is a race), and its stderr
into the file ERR; prints CMD's exit status. The child gets SIGPIPE's
default back (subprocess restores it), as a shell would give it."""
import os
import subprocess
import sys

r, w = os.pipe()
os.close(r)
with open(sys.argv[1], "w") as err:
    print(subprocess.run(sys.argv[2:], stdout=w, stderr=err).returncode)
