"""Runtime support for generated programs.

`arc_pipeline.runtime.common` is our clean-room implementation of the BARC `common` library
(docs/runtime.md). Generated programs import it as `from common import *`; the sandbox
installs it under that name.
"""
