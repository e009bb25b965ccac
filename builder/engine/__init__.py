"""The container engine behind one interface (`base.Engine`); `docker.DockerEngine` is the implementation, which
hands builds to the BuildKit CLI (`buildkit`) and does everything else through the docker SDK."""
