"""Code that runs inside users' pods, on the Python of the user's image.

Its modules import the standard library, `rljob_contract` and the image's own framework only
(Ray; torch for the bridge into Hugging Face's Trainer, inside the Trainer's calls): a lint
contract and tests/unit/operator/test_dependencies.py hold them to it, since a user's image
has neither rljob nor its dependencies. The operator never imports them: `launcher.podside`
reads them as text and ships those a job needs in its launcher ConfigMap, mounted flat
(ray_node.py, rljob_ray_bridge.py and a framework's rljob_*_hooks.py, or rljob_hf_bridge.py;
rljob_guest.py, rljob_contract/) at
the launcher directory, where they import each other as top-level modules (and, in this
repository's tests, through pytest's pythonpath).
"""
