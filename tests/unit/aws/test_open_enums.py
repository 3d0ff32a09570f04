"""Instance types are the control plane's to judge (local types from a file); other enums stay closed."""

from __future__ import annotations

import botocore.session
import pytest

from servekit.aws.errors import ApiError
from servekit.aws.validate import parse_input

MODEL = botocore.session.get_session().get_service_model("sagemaker")


def test_a_local_instance_type_name_passes_validation() -> None:
    shape = MODEL.operation_model("CreateEndpointConfig").input_shape
    params = parse_input(
        shape,
        {
            "EndpointConfigName": "c",
            "ProductionVariants": [{"VariantName": "A", "ModelName": "m", "InstanceType": "ml.local.tiny"}],
        },
    )
    assert params["ProductionVariants"][0]["InstanceType"] == "ml.local.tiny"


def test_other_enums_are_still_checked() -> None:
    shape = MODEL.operation_model("ListEndpoints").input_shape
    with pytest.raises(ApiError) as err:
        parse_input(shape, {"SortBy": "Size"})
    assert err.value.code == "ValidationException" and "enum value set" in err.value.message
