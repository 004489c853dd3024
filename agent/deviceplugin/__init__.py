"""The kubelet device-plugin protocol (v1beta1): the RPCs (``servicer``), serving and registering
(``lifecycle``), and which pod holds which slot (``podresources``)."""
