"""Names the kubelet and fpga-slot's DRA driver agree on."""

from __future__ import annotations

#: The DRA driver name: ResourceSlice spec.driver, DeviceClass selectors, PluginInfo.name.
DRIVER_NAME = "fpga.example.com"
#: PluginInfo.type of a DRA driver.
PLUGIN_TYPE = "DRAPlugin"
#: Our services, best first, as the kubelet names them ("<proto package short>.<service>").
SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
#: The resource-health service, advertised when served.
HEALTH_SERVICE = "v1alpha1.DRAResourceHealth"
#: How long a preparation may take: the kubelet gives each call 45 s.
KUBELET_CALL_TIMEOUT_S = 45.0
#: Grace for in-flight calls when the server stops.
STOP_GRACE_S = 1.0
