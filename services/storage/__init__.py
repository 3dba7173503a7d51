"""The artifact store: bundles, checkpoints, models, TensorBoard files, data and logs.

    store.py      ArtifactStore: a directory or S3 (fsspec), single objects and prefixes
    tree_sync.py  a local tree and a store prefix kept in step, sending only changes
    keys.py       the store's layout: every key Cohort reads or writes, checked
    bundles.py    code bundles: packed deterministically, checked, unpacked safely
    archive_members.py  an archive's members as a tree decided from names alone: the one
                  check the api's and every unpack share
    archive_stream.py   a .tar.gz read as a stream: each admitted member and its data, bounded
    unpacking.py  Cohort's own unpacker (never tarfile's extraction), no link followed
    owned_tree.py a tree another user writes, read without following its links

Node-safe: no SQL, no FastAPI, no Celery (agents import it)."""
