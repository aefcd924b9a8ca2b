"""Three-level action router.

Intent-cache matching, B-spline trajectory synthesis, PID with current clamp,
over a physically invalidated three-layer cache.
"""
