"""The API's routes, one router per group: the web page, health and stats, search, and
images (reads and writes). ``create_app`` includes them in this order."""

from . import admin, images, page, search

ROUTERS = (page.router, admin.router, search.router, images.router)

__all__ = ["ROUTERS"]
