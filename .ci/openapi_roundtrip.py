"""A client generated from the served OpenAPI document by openapi-python-client does a round
trip against that server: enqueue a task with a key and a priority, read it back by key, claim
it and acknowledge it. Run by .ci/clients with the generated package on the path:
python openapi_roundtrip.py BASE_URL"""
import sys

from dueq_client import AuthenticatedClient
from dueq_client.api.claim import ack, claim
from dueq_client.api.tasks import enqueue, get_task_by_key
from dueq_client.models import AckRequest, ClaimRequest, EnqueueRequest

client = AuthenticatedClient(base_url=sys.argv[1], token="unused")
created = enqueue.sync(
    "roundtrip",
    client=client,
    body=EnqueueRequest.from_dict({"payload": {"order": 7}, "key": "order-7", "priority": 3}),
)
assert type(created).__name__ == "EnqueueResponse" and created.created, created
task = get_task_by_key.sync("roundtrip", "order-7", client=client)
assert type(task).__name__ == "TaskResponse", task
assert (task.id, task.priority, task.to_dict()["payload"]) == (created.id, 3, {"order": 7}), task
claimed = claim.sync("roundtrip", client=client, body=ClaimRequest.from_dict({"max": 10}))
assert [t.id for t in claimed.tasks] == [created.id], claimed.to_dict()
done = ack.sync(
    "roundtrip",
    created.id,
    client=client,
    body=AckRequest.from_dict({"lease_token": claimed.tasks[0].lease_token}),
)
assert type(done).__name__ == "AckResponse" and done.outcome.value == "acked", done
print("openapi-python-client round trip: enqueue, get by key, claim, ack")
