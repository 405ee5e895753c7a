"""Settings of the test project: its SQLite database, broker and files come from the
environment the tests set (LANNER_DJANGO_DB, LANNER_DJANGO_BROKER, LANNER_DJANGO_LOG,
LANNER_DJANGO_OUTBOX), so that the test process and its `manage.py lanner_worker`
subprocess share them."""

import importlib.util
import os

import django

SECRET_KEY = "lanner-tests-only"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "lanner.contrib.django",
    "shop",
]
if importlib.util.find_spec("django.tasks") is None:  # Django 5.2: the django-tasks backport
    INSTALLED_APPS.insert(0, "django_tasks")
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("LANNER_DJANGO_DB", "db.sqlite3"),
        "OPTIONS": {"timeout": 30},
    }
}
if django.VERSION >= (6, 1):  # EMAIL_BACKEND is deprecated there
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.locmem.EmailBackend"}}
else:
    EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
BROKER = os.environ.get("LANNER_DJANGO_BROKER", "sqlite:///db.sqlite3?shared=1")
TASKS = {
    "default": {
        "BACKEND": "lanner.contrib.django.LannerBackend",
        "QUEUES": ["default", "ordered", "emails"],
        "OPTIONS": {"broker": BROKER, "outbox": os.environ.get("LANNER_DJANGO_OUTBOX") == "1"},
    },
    "retrying": {  # a failed run is retried twice (lanner's backoff) before it fails
        "BACKEND": "lanner.contrib.django.LannerBackend",
        "QUEUES": ["default"],
        "OPTIONS": {"broker": BROKER, "retries": 2},
    },
}
LANNER_DJANGO_LOG = os.environ.get("LANNER_DJANGO_LOG", "tasks.log")
