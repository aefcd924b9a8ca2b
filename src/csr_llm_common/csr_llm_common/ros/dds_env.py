"""Keep DDS traffic on this machine: loopback discovery and a private domain per run."""
import os
import random
from typing import MutableMapping, Optional

# Fast DDS maps a domain to UDP ports; ids 0-101 are valid on every platform.
MAX_PORTABLE_DOMAIN_ID = 101


def localhost_dds_env(env: Optional[MutableMapping[str, str]] = None,
                      domain_id: Optional[int] = None) -> MutableMapping[str, str]:
    """Set loopback-only discovery in env (os.environ by default); keep or pick a domain id.

    An existing ROS_DOMAIN_ID is kept so that processes of one run share it; a random one is
    chosen only where none is set, so parallel runs on one machine do not see each other.
    """
    env = os.environ if env is None else env
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    if domain_id is not None:
        env["ROS_DOMAIN_ID"] = str(domain_id)
    elif not env.get("ROS_DOMAIN_ID"):
        env["ROS_DOMAIN_ID"] = str(random.randint(1, MAX_PORTABLE_DOMAIN_ID))
    return env
