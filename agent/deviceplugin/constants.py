"""Names and limits the kubelet and fpga-slot agree on."""

from __future__ import annotations

RESOURCE_NAME = "example.com/fpga-slot"
API_VERSION = "v1beta1"
#: The kubelet's registration socket, inside the device-plugin directory.
KUBELET_SOCKET = "kubelet.sock"
#: Our socket's file name inside the device-plugin directory (sent as RegisterRequest.endpoint).
ENDPOINT = "fpga-slot.sock"

#: How long one Register call may take before we retry.
REGISTER_TIMEOUT_S = 5.0
#: First and largest delay between failed registration attempts.
REGISTER_BACKOFF_MIN_S = 0.05
REGISTER_BACKOFF_MAX_S = 5.0
#: How long the plugin's own server may take to answer its first call.
SELF_CHECK_TIMEOUT_S = 2.0
#: Grace for in-flight RPCs when the server stops.
STOP_GRACE_S = 1.0
#: Safety net behind inotify: how often the socket's identity is re-checked.
SOCKET_RECHECK_S = 5.0
#: Deadline for a pod-resources lookup made during PreStartContainer.
POD_RESOURCES_TIMEOUT_S = 2.0

#: Options of every channel to the kubelet or our own socket: a private subchannel, so no shared
#: reconnect backoff makes a kubelet that just came back look absent.
FRESH_CHANNEL_OPTIONS = (("grpc.use_local_subchannel_pool", 1),)
