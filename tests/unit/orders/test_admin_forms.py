"""Every admin page's form builds on this Django without a deprecation warning (issue 57).

Django 5.2 warns when a form's URLField is left to its default scheme, and warns again
when the transitional setting that would silence it is set. No admin form has a URLField
now (a product's picture is an https address or a static path: test_product_images.py),
and this keeps a new one from bringing the warning back.
"""

from __future__ import annotations

import warnings

import pytest
from django.contrib import admin
from django.contrib.auth import get_user_model

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator_request(rf):
    request = rf.get("/admin/")
    request.user = get_user_model().objects.create_superuser("root", password="x" * 12)
    return request


def test_every_admin_form_builds_without_a_deprecation_warning(operator_request):
    built = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        warnings.simplefilter("error", PendingDeprecationWarning)
        for model, model_admin in admin.site._registry.items():
            model_admin.get_form(operator_request)
            built.append(model.__name__)
            for inline in model_admin.get_inline_instances(operator_request):
                inline.get_formset(operator_request)
            if model_admin.list_editable:
                model_admin.get_changelist_formset(operator_request)
    assert "Product" in built
