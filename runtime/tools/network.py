"""What the tool descriptions tell the model about the session's network.

Descriptions carry the no-network sentences below; `ListTools` with a
session id swaps them for that session's hosts (`describe_network`).
"""

from __future__ import annotations

NO_NETWORK = (
    "The sandbox has no network: nothing can be downloaded (pip install fails); "
    "use what is installed."
)
NO_NETWORK_SHELL = "The sandbox has NO network (pip install, git clone, curl will fail)."


def _hosts(allow: list[str]) -> str:
    listed = ", ".join(allow)
    if any(":" not in pattern for pattern in allow):
        listed += " (ports 80 and 443 where no port is given)"
    return listed


def describe_network(allow: list[str]) -> dict[str, str]:
    """Each no-network sentence → what it says for a session allowed `allow`."""
    if not allow:
        return {}
    hosts = _hosts(allow)
    return {
        NO_NETWORK_SHELL: (
            f"The sandbox's network reaches only these hosts: {hosts}. Commands get there "
            "through an HTTP proxy already set in HTTP_PROXY/HTTPS_PROXY, which pip, git, "
            "curl, npm and Python's urllib use (pip install NAME installs into your user "
            "site); programs that ignore the proxy have no network at all. Any other host, "
            "any IP address and any local or private address is refused with HTTP 403, and "
            "the result's network_denied lists the hosts refused."
        ),
        NO_NETWORK: (
            f"The sandbox's network reaches only {hosts}, through its HTTP proxy: download "
            "with shell (pip, curl, git)."
        ),
    }


def for_session(description: str, allow: list[str]) -> str:
    """`description` as a session allowed `allow` should read it."""
    for sentence, replacement in describe_network(allow).items():
        description = description.replace(sentence, replacement)
    return description
