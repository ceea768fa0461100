"""The known-answer canary against silent data corruption (docs/canary.md).

Node side: :mod:`.node` starts the GPU worker (:mod:`.worker`, :mod:`.work`, :mod:`.cupy_backend`)
and :mod:`.verdict` judges. Admin side: :mod:`.submit` collects results, elects known answers
(:mod:`.fleet`), drains (:mod:`.drain`) and submits low-priority jobs; :mod:`.status` shows it.
Nothing here imports CuPy or numpy at load.
"""
