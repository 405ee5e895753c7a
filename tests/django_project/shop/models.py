from django.db import models


class Order(models.Model):  # type: ignore[misc]
    item = models.CharField(max_length=100)
