"""The one error of a setting that cannot work, its message naming the flag: raised where
the settings are read (vkubelet/settings.py, vkubelet/cli.py) and by a loop that finds a
setting unusable as it starts (a port in use, a certificate unreadable), which
``kube-offload vkubelet`` prints and exits 2 for."""

from __future__ import annotations


class SettingsError(ValueError):
    """A setting that cannot work; the message names the flag."""
