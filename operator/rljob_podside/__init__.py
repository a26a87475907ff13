"""Code that runs inside users' pods, on the Python of the user's image.

Its modules import the standard library, `rljob_contract` and the image's own Ray only (a
lint contract and tests/unit/operator/test_dependencies.py hold them to it), since a Ray image
has neither rljob nor its dependencies. The operator never imports them: `launcher.ray` reads
them as text and ships them in the job's launcher ConfigMap, mounted flat (ray_node.py,
rljob_ray_bridge.py, rljob_contract/) at the launcher directory, where they import each other
as top-level modules.
"""
