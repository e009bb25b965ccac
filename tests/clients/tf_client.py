"""TensorFlow's cluster resolvers on each case's env (protocol: clientio), in the tf venv.

* ``tf_config``: ``TFConfigClusterResolver`` on ``TF_CONFIG``: task type and id, the cluster, and the worker
  count and id ``multi_worker_util`` derives for chief and workers. ``multi_worker`` says what
  ``MultiWorkerMirroredStrategy`` makes of it: it trains alone when the cluster is empty, whatever the task says.
* ``slurm``: ``SlurmClusterResolver`` on the ``SLURM_*`` variables (GPUs from ``CUDA_VISIBLE_DEVICES``, left as
  they are): its cluster and this task's type and id.
"""

from __future__ import annotations

import os
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from clientio import serve  # noqa: E402
from tensorflow.python.distribute import multi_worker_util  # noqa: E402
from tensorflow.python.distribute.cluster_resolver import SlurmClusterResolver, TFConfigClusterResolver  # noqa: E402


def answer(case: dict[str, Any]) -> dict[str, Any]:
    if case["mode"] == "slurm":
        resolver = SlurmClusterResolver(auto_set_gpu=False)
        cluster = resolver.cluster_spec().as_dict()
        return {"task_type": resolver.task_type, "task_id": resolver.task_id, "cluster": cluster}
    resolver = TFConfigClusterResolver()
    spec = resolver.cluster_spec()
    cluster = spec.as_dict()
    out: dict[str, Any] = {"task_type": resolver.task_type, "task_id": resolver.task_id, "cluster": cluster,
                           "multi_worker": bool(cluster), "worker_count": None, "id_in_cluster": None}
    if cluster and resolver.task_type in ("chief", "worker"):
        out["worker_count"] = multi_worker_util.worker_count(spec, resolver.task_type)
        out["id_in_cluster"] = multi_worker_util.id_in_cluster(spec, resolver.task_type, resolver.task_id)
    return out


if __name__ == "__main__":
    serve(answer)
