"""Object-storage faults injected for real: a proxy in front of moto's S3 server, and SIGKILL.

Each test proves an all-or-nothing publish: an object exists only when complete, and a failed or
killed upload leaves no object (and no open multipart upload when the failure was seen).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import boto3
import pytest
import s3fs

from pipeline_core.storage import fs as fsmod
from pipeline_core.storage.fs import fetch_files, local_staging
from tests.s3_proxy import FaultProxy

MIB = 1 << 20


def client(endpoint):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")


def open_uploads(endpoint, bucket):
    return client(endpoint).list_multipart_uploads(Bucket=bucket).get("Uploads", [])


def exists(endpoint, bucket, key):
    return client(endpoint).list_objects_v2(Bucket=bucket, Prefix=key).get("KeyCount", 0) > 0


@pytest.fixture()
def proxy(s3_endpoint):
    with FaultProxy(s3_endpoint) as p:
        yield p


def no_retry_options(endpoint):
    return {
        "endpoint_url": endpoint,
        "config_kwargs": {"retries": {"max_attempts": 1, "mode": "standard"}, "connect_timeout": 2, "read_timeout": 5},
    }


def test_exception_inside_a_write_publishes_nothing(s3_bucket, s3_endpoint):
    bucket_url, options = s3_bucket
    bucket = bucket_url.removeprefix("s3://")
    with pytest.raises(RuntimeError, match="mid-write"), local_staging(f"{bucket_url}/out/part.h5", options) as tmp:
        with open(tmp, "wb") as f:
            f.write(b"x" * MIB)
        raise RuntimeError("failure mid-write")
    assert not exists(s3_endpoint, bucket, "out/part.h5")
    assert open_uploads(s3_endpoint, bucket) == []


def test_failed_multipart_part_aborts_the_upload(s3_bucket, s3_endpoint, proxy, monkeypatch):
    bucket_url, _ = s3_bucket
    bucket = bucket_url.removeprefix("s3://")
    monkeypatch.setattr(fsmod, "UPLOAD_CHUNKSIZE", 5 * MIB)
    proxy.plan.add("PUT", r"partNumber=2", "500", times=10**6)
    s3fs.S3FileSystem.clear_instance_cache()
    options = no_retry_options(proxy.url)
    with pytest.raises(Exception), local_staging(f"{bucket_url}/big.h5", options) as tmp:  # noqa: B017 - any upload error
        with open(tmp, "wb") as f:
            f.write(os.urandom(12 * MIB))
    assert not exists(s3_endpoint, bucket, "big.h5")
    assert open_uploads(s3_endpoint, bucket) == []


def test_upload_failing_with_500_every_time_publishes_nothing(s3_bucket, s3_endpoint, proxy):
    bucket_url, _ = s3_bucket
    bucket = bucket_url.removeprefix("s3://")
    proxy.plan.add("PUT", r"/always\.h5", "500", times=10**6)
    s3fs.S3FileSystem.clear_instance_cache()
    with (
        pytest.raises(Exception, match="500|InternalError|internal error"),
        local_staging(f"{bucket_url}/always.h5", no_retry_options(proxy.url)) as tmp,
    ):
        with open(tmp, "wb") as f:
            f.write(b"data")
    assert not exists(s3_endpoint, bucket, "always.h5")


UPLOADER = textwrap.dedent(
    """
    import os, sys
    from pipeline_core.storage import fs
    fs.UPLOAD_CHUNKSIZE = 5 << 20
    url, endpoint, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    options = {"endpoint_url": endpoint, "config_kwargs": {"retries": {"max_attempts": 1, "mode": "standard"}}}
    with fs.local_staging(url, options) as tmp:
        with open(tmp, "wb") as f:
            f.write(bytes(range(256)) * (size // 256))
        print("uploading", flush=True)
    print("done", flush=True)
    """
)


def test_sigkill_during_a_multipart_upload_leaves_no_object_and_a_rerun_completes(
    s3_bucket, s3_endpoint, proxy, tmp_path
):
    bucket_url, _ = s3_bucket
    bucket = bucket_url.removeprefix("s3://")
    script = tmp_path / "upload.py"
    script.write_text(UPLOADER)
    proxy.plan.add("PUT", r"partNumber=3", "hang", times=1)
    url, size = f"{bucket_url}/killed.h5", 16 * MIB
    proc = subprocess.Popen([sys.executable, str(script), url, proxy.url, str(size)], stdout=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while proxy.plan.rules[0].hits == 0 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert proxy.plan.rules[0].hits == 1, "the upload never reached part 3"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert not exists(s3_endpoint, bucket, "killed.h5")
    rerun = subprocess.run(
        [sys.executable, str(script), url, s3_endpoint, str(size)], capture_output=True, text=True, timeout=300
    )
    assert rerun.returncode == 0, rerun.stderr
    body = client(s3_endpoint).get_object(Bucket=bucket, Key="killed.h5")["Body"].read()
    assert body == bytes(range(256)) * (size // 256)


def test_a_warm_listing_cache_still_sees_another_process_write(s3_bucket, tmp_path):
    bucket_url, options = s3_bucket
    fs = s3fs.S3FileSystem(**options)
    fs.pipe(f"{bucket_url}/chunks/train_chunk_0.jsonl", b'{"text": "a"}\n')
    assert len(fetch_files(f"{bucket_url}/chunks", ".jsonl", options)) == 1
    fs.ls(f"{bucket_url}/chunks")  # warm this process's listing cache
    writer = f"import s3fs; s3fs.S3FileSystem(endpoint_url={options['endpoint_url']!r}).pipe({bucket_url + '/chunks/train_chunk_1.jsonl'!r}, b'x')"
    subprocess.run([sys.executable, "-c", writer], check=True, timeout=120)
    assert [u.rsplit("/", 1)[-1] for u in fetch_files(f"{bucket_url}/chunks", ".jsonl", options)] == [
        "train_chunk_0.jsonl",
        "train_chunk_1.jsonl",
    ]
