"""tfdist's Airflow plugin, for deployments that copy files into the plugins folder instead of installing the
package (the ``tfdist`` package itself copied there too, say in a plugins.zip).

An installed tfdist registers its plugin through its ``airflow.plugins`` entry point: this file then registers
nothing, so the plugin is never registered twice. See README, "Install into an existing Airflow"."""

from tfdist.operators.web.plugin import TfdistPlugin, registered_by_entry_point

if registered_by_entry_point():
    del TfdistPlugin
