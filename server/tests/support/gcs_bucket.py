#!/usr/bin/env python3
"""The GCS emulator's buckets and objects through its JSON API, where object_store's XML
uploads are not understood: `gcs_bucket.py PORT BUCKET` creates a bucket,
`gcs_bucket.py PORT BUCKET KEY FILE` uploads FILE as KEY. Standard library only."""
import json
import sys
import urllib.error
import urllib.parse
import urllib.request

port, bucket = sys.argv[1], sys.argv[2]
base = f"http://127.0.0.1:{port}"
if len(sys.argv) == 3:
    req = urllib.request.Request(
        f"{base}/storage/v1/b?project=cogfeed-test",
        data=json.dumps({"name": bucket}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
else:
    key, path = sys.argv[3], sys.argv[4]
    with open(path, "rb") as f:
        body = f.read()
    name = urllib.parse.quote(key, safe="")
    req = urllib.request.Request(
        f"{base}/upload/storage/v1/b/{bucket}/o?uploadType=media&name={name}",
        data=body,
        headers={"Content-Type": "application/octet-stream"},
        method="POST",
    )
try:
    urllib.request.urlopen(req, timeout=30).read()
except urllib.error.HTTPError as e:
    if e.code != 409:  # the bucket is already there
        raise
