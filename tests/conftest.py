import os

from hypothesis import HealthCheck, settings

# every test compiles afresh (no artifact from an earlier test or run is loaded);
# tests/runtime/cpu/test_cache.py turns artifacts back on
os.environ["LUMOS_ARTIFACTS"] = "off"

settings.register_profile(
    "default", deadline=None, max_examples=40, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", deadline=None, max_examples=400)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
