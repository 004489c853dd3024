"""In-process stand-ins for the kubelet's device manager, pod-resources API and DRA side, over real unix sockets."""
