"""The model snapshot from S3: `python -m worker.weights fetch S3_URI DEST` (see __main__.py).

`manifest.py` reads weights.json as untrusted input, `uri.py` the S3 location, `disk.py` what
DEST holds and the staging area, `fetch.py` the parallel ranged GETs. Standard library and
boto3 only, like the rest of the worker.
"""
