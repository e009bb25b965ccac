"""The contract between the host (``trainimg``) and its images (``trainimg_runtime``): every name both sides read.

The host writes these labels and paths when it renders and builds an image; the runtime inside the image and the
host's conformance suite read them back. Each fact is written here once (standard library only, so the image can
import it), and both sides import it, so a label renamed on one side cannot silently be missed on the other.
Templates never spell them: the blocks pass them in.
"""

from __future__ import annotations

# -- labels the host writes on images ---------------------------------------------------------------------------
LABEL_PREFIX = "trainimg."
VARIANT_LABEL = "trainimg.variant"
RECIPE_LABEL = "trainimg.recipe"  # the recipe file the variant came from
FRAMEWORK_LABEL = "trainimg.framework"
REDUCTION_SERVER_LABEL = "trainimg.reduction-server"  # "wanted" or "none"
REDUCTION_SERVER_PACKAGE = "google-reduction-server"  # the Debian package Google's apt repository serves
ABSENT_LABEL = "trainimg.absent"  # components the build was allowed to miss, comma-separated
RECIPE_VERSION_PREFIX = "trainimg.recipe."  # + python, framework, cuda, cudnn, nccl, hypertune: what was asked
VERSION_PREFIX = "trainimg.version."  # + the same keys: what the image holds, read back after the build
NCCL_MINIMUM_LABEL = "trainimg.nccl.minimum"  # the NCCL floor from the compatibility data, at render time
LOCK_DIGEST_LABEL = "trainimg.lock.digest"  # sha256 of images/<variant>/requirements.lock, the wheels installed
CUDA_ARCHS_LABEL = "trainimg.cuda.archs"  # sm_XY/compute_XY the framework build holds kernels for (manifest)
DRIVER_MIN_LABEL = "trainimg.cuda.driver_min"  # the NVIDIA driver a GPU image needs (recipe/drivers.py)
INPUTS_LABEL = "trainimg.inputs"  # the variant's inputs key (publish/inputs.py): CI skips an unchanged image

OCI_TITLE = "org.opencontainers.image.title"
OCI_BASE_NAME = "org.opencontainers.image.base.name"
OCI_SOURCE = "org.opencontainers.image.source"
OCI_REVISION = "org.opencontainers.image.revision"
OCI_CREATED = "org.opencontainers.image.created"
OCI_VERSION = "org.opencontainers.image.version"
OCI_PREFIX = "org.opencontainers."

# -- labels the host puts on the containers, networks and images it owns ----------------------------------------
MANAGED_LABEL = "trainimg.managed"
RUN_LABEL = "trainimg.run"
OWNER_LABEL = "trainimg.owner"  # "<hostname>:<pid>" of the trainimg process that started it
REGISTRY_LABEL = "trainimg.registry"

# -- paths inside an image --------------------------------------------------------------------------------------
VENV = "/opt/venv"
ETC_DIR = "/etc/trainimg"
MANIFEST_PATH = f"{ETC_DIR}/manifest.json"
CONSTRAINTS_PATH = f"{ETC_DIR}/constraints.txt"
ABSENT_DIR = f"{ETC_DIR}/absent"  # one empty file per component the build was allowed to miss
LABELS_PATH = f"{ETC_DIR}/labels.json"  # the static labels again, for the in-image selftest (no engine to ask)
SBOM_PATH = f"{ETC_DIR}/sbom.cdx.json"  # CycloneDX 1.6 of everything installed, written after the last install
# The variant's requirements lock where a build leaves a copy in the image: the SBOM takes wheel hashes from it.
IMAGE_LOCK_PATH = f"{ETC_DIR}/requirements.lock"
DPKG_STATUS_PATH = "/var/lib/dpkg/status"  # what dpkg installed: the SBOM's OS packages
OS_RELEASE_PATH = "/etc/os-release"  # the distribution (ID, VERSION_CODENAME) the deb purls name
RUNTIME_PACKAGE = "trainimg_runtime"
RUNTIME_ROOT = "/opt/trainimg"  # on sys.path (a .pth file in the venv) in every trainimg image
RUNTIME_BAKED = f"{RUNTIME_ROOT}/{RUNTIME_PACKAGE}"
RUNTIME_MOUNTED = f"/opt/trainimg-host/{RUNTIME_PACKAGE}"  # the host's copy, for images without their own
LAUNCH_BIN = "/usr/local/bin/trainimg-launch"
RUNTIME_BIN = "/usr/local/bin/trainimg-runtime"

# -- the advisory audit a build followed (builder/audit): its state and VEX reach the SBOM step as a file -------
AUDITED, AUDIT_SKIPPED, NOT_AUDITED = "audited", "skipped", "not-audited"
AUDIT_STATES = (AUDITED, AUDIT_SKIPPED, NOT_AUDITED)

# -- platforms and their env ------------------------------------------------------------------------------------
VERTEX = "vertex"
AIPLATFORM = "aiplatform"
UAI = "uai"
SLURM = "slurm"
TRAINJOB = "trainjob"  # Kubeflow Trainer v2
PYTORCHJOB = "pytorchjob"  # Kubeflow Training Operator v1, as TFJOB and JAXJOB
TFJOB = "tfjob"
JAXJOB = "jaxjob"
JOBSET = "jobset"
AZUREML = "azureml"  # Azure Machine Learning command jobs
SAGEMAKER = "sagemaker"  # Amazon SageMaker training jobs
MPI = "mpi"  # Open MPI's mpirun: plain, or Kubeflow Trainer's MPI and DeepSpeed runtimes
#: Every platform `trainimg test`, `run` and ``selftest`` replay (`topology`), each one a ``--platform`` value the
#: runtime's detection takes (`platforms.FORCEABLE`).
PLATFORMS = (VERTEX, AIPLATFORM, UAI, SLURM, TRAINJOB, PYTORCHJOB, TFJOB, JAXJOB, JOBSET, AZUREML, SAGEMAKER, MPI)
CLOUD_PLATFORMS = (VERTEX, AIPLATFORM)  # those with a cloud job body (`trainimg spec`)
DEFAULT_PLATFORM = VERTEX  # what `trainimg test` and ``selftest`` replay when no --platform is given
VERTEX_POOLS = {"workerpool0": "chief", "workerpool1": "worker", "workerpool2": "ps", "workerpool3": "evaluator"}

# -- conformance checks the probe runs, in report order ---------------------------------------------------------
CHECK_NAMES = (
    "python",
    "framework",
    "nccl",
    "cudnn",
    "reduction_server",
    "hypertune",
    "cluster_parsing",
    "gpu",
    "shm",
    "duplicate_libs",
)

# -- the conformance test's time limit: `trainimg test --timeout` and the in-image ``selftest --timeout`` -----------
TEST_TIMEOUT_RANGE = (5.0, 7200.0)  # seconds, both ends allowed
DEFAULT_TEST_TIMEOUT = 240.0

# -- exit codes (host CLI and in-image verbs alike) -------------------------------------------------------------
EXIT_OK = 0
EXIT_FAILED = 1  # a check ran and failed
EXIT_USAGE = 2  # bad input: nothing was built or changed
EXIT_INTERNAL = 70  # EX_SOFTWARE: a bug in trainimg
EXIT_TIMED_OUT = 124  # timeout(1)'s code: a job stopped at its --timeout
EXIT_CANNOT_EXECUTE = 126  # the shell's "found but not executable"
EXIT_NOT_FOUND = 127  # the shell's "command not found"
EXIT_INTERRUPTED = 130  # 128 + SIGINT
# The in-image all-reduce: 0 exact sum, EXIT_FAILED a wrong sum, EXIT_USAGE a setup error, and this on timeout.
EXIT_ALLREDUCE_TIMEOUT = 3
