#!/usr/bin/env python3
"""Creates a blob container on Azurite (object_store cannot): azure_container.py PORT NAME."""
import sys

from azure.core.exceptions import ResourceExistsError
from azure.storage.blob import BlobServiceClient

KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
port, name = sys.argv[1], sys.argv[2]
conn = (f"DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey={KEY};"
        f"BlobEndpoint=http://127.0.0.1:{port}/devstoreaccount1;")
try:
    BlobServiceClient.from_connection_string(conn).create_container(name)
except ResourceExistsError:
    pass
