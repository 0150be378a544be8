"""The plugin's web app: the training-runs page (page.html, page.css, and page.js with the ES modules it imports),
its data routes (``api``) behind Airflow's auth, and the plugin registering both (``plugin``). The operators'
links into it are in ``tfdist.operators.links``."""
