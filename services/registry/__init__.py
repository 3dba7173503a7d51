"""The model registry: named models with numbered versions (each with the lineage of the
job that made it), aliases pointing at one version each, and every alias move.

names.py      the rules for model and alias names, and `NAME:VERSION` / `NAME@ALIAS`
schemas.py    the registry's I/O schemas (one declaration per shape)
lineage.py    a job's lineage, copied into a version when it is registered
versions.py   register_version(): the one way a version is made; reads of models, versions
aliases.py    move_alias(): the one way an alias moves; its history
files.py      a version's files in the artifact store: listed, resolved for download
promotion.py  a schedule's promotion: a version registered and the schedule's alias moved
views.py      the API views of models, versions and aliases
"""
