"""A real kubelet node for the local cluster: images, runtime, configuration."""
