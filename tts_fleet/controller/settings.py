"""What the controller function is told, through its environment: the one contract between
the Pulumi component that sets these variables and the handler that reads them. Pure."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from tts_fleet.scaling.controller import ControllerParams

# The Lambda handler, as the runtime names it (module path in the zip + function).
HANDLER = "tts_fleet.controller.handler.handle"
# Where the state lives: the stack's outputs bucket, outside `outputs/` (what `results`
# reads) and `failures/`; one small JSON object rewritten once a minute at most.
STATE_KEY = "controller/state.json"
# Sampling stops this long after the invocation started, so an invocation every minute
# never overlaps the next (the function's timeout leaves room for the last calls).
SAMPLING_BUDGET_S = 50.0

ENV_QUEUE_URL = "TTS_FLEET_QUEUE_URL"
ENV_CLUSTER = "TTS_FLEET_CLUSTER"
ENV_SERVICE = "TTS_FLEET_SERVICE"
ENV_BUCKET = "TTS_FLEET_STATE_BUCKET"
ENV_STATE_KEY = "TTS_FLEET_STATE_KEY"
ENV_STACK = "TTS_FLEET_STACK"
ENV_PARAMS = "TTS_FLEET_CONTROLLER_PARAMS"


@dataclass(frozen=True)
class Settings:
    queue_url: str
    cluster: str
    service: str
    bucket: str
    stack: str
    params: ControllerParams
    state_key: str = STATE_KEY

    @property
    def resource_id(self) -> str:
        """The service's Application Auto Scaling resource id."""
        return f"service/{self.cluster}/{self.service}"

    def to_env(self) -> dict[str, str]:
        return {
            ENV_QUEUE_URL: self.queue_url,
            ENV_CLUSTER: self.cluster,
            ENV_SERVICE: self.service,
            ENV_BUCKET: self.bucket,
            ENV_STATE_KEY: self.state_key,
            ENV_STACK: self.stack,
            ENV_PARAMS: params_json(self.params),
        }

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        missing = [
            name
            for name in (ENV_QUEUE_URL, ENV_CLUSTER, ENV_SERVICE, ENV_BUCKET, ENV_STACK, ENV_PARAMS)
            if not env.get(name)
        ]
        if missing:
            raise KeyError(f"controller environment lacks {', '.join(missing)}")
        return cls(
            queue_url=env[ENV_QUEUE_URL],
            cluster=env[ENV_CLUSTER],
            service=env[ENV_SERVICE],
            bucket=env[ENV_BUCKET],
            stack=env[ENV_STACK],
            params=ControllerParams(**json.loads(env[ENV_PARAMS])),
            state_key=env.get(ENV_STATE_KEY) or STATE_KEY,
        )


def params_json(params: ControllerParams) -> str:
    """The parameters as the function reads them back: `ControllerParams(**json)`. The
    Pulumi program computes them from the stack config, so the function needs no pydantic."""
    return json.dumps(asdict(params), sort_keys=True, separators=(",", ":"))
