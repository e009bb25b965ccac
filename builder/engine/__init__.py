"""The container engine behind one interface (`base.Engine`); `docker.DockerEngine` is the implementation."""
