"""The deployed scaling controller (issue #13): a Lambda handler around
`tts_fleet.scaling.controller.decide`. It imports `tts_fleet.scaling` and boto3 only, because its
zip holds just those two packages of the repo (components/controller.py builds it) and the
Lambda runtime has boto3 but no pydantic."""
