"""Secrets never reach output: structured data and free text."""

from sparkctl.transport.redact import MASK, redact, redact_obj


def test_secret_keys_are_masked_in_structured_data_and_remembered():
    doc = {"env": {"HF_TOKEN": "hf_abcdefghijklmnopqrstuv", "VLLM_HOST_IP": "10.0.0.1"}}
    out = redact_obj(doc)
    assert out["env"]["HF_TOKEN"] == MASK
    assert out["env"]["VLLM_HOST_IP"] == "10.0.0.1"
    # the same value leaking later into free text is masked too
    assert "hf_abcdefghijklmnopqrstuv" not in redact("pulling with hf_abcdefghijklmnopqrstuv ...")


def test_free_text_shapes():
    line = "docker run -e HF_TOKEN=supersecretvalue -e API_KEY='x y' -H 'Authorization: Bearer abc.def'"
    out = redact(line)
    assert "supersecretvalue" not in out and "abc.def" not in out and "x y" not in out
    assert "HF_TOKEN=" + MASK in out
    pem = "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----"
    assert redact(pem) == MASK


def test_plain_text_is_untouched():
    assert redact("fabric IP 10.231.100.2/24 already on enp1s0f0np0") == "fabric IP 10.231.100.2/24 already on enp1s0f0np0"


def test_token_counts_are_not_secrets():
    doc = {"max_num_batched_tokens": 8192, "num_speculative_tokens": 3, "total_output_tokens": 400, "HF_TOKEN": "abcd1234"}
    out = redact_obj(doc)
    assert out["max_num_batched_tokens"] == 8192 and out["num_speculative_tokens"] == 3
    assert out["total_output_tokens"] == 400 and out["HF_TOKEN"] == MASK
    assert redact("runtime.max_num_batched_tokens: 2 is below max_num_seqs 4") == (
        "runtime.max_num_batched_tokens: 2 is below max_num_seqs 4"
    )
    assert "8192" in redact("max-num-batched-tokens 8192")


def test_secret_key_words():
    from sparkctl.transport.redact import is_secret_key

    for k in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "api_key", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "Authorization"):
        assert is_secret_key(k), k
    for k in ("max_num_batched_tokens", "kv_pool_tokens", "tokenizer", "author", "keyboard"):
        assert not is_secret_key(k), k


def test_names_marked_secret_are_masked_in_free_text_whatever_their_value():
    from sparkctl.transport.redact import remember_secret_name

    remember_secret_name("WANDB_PROJECT_ID")  # runtime.secret_env: a name no rule calls secret
    remember_secret_name("X.Y")
    out = redact("env WANDB_PROJECT_ID=p7 X.Y=q WANDB_PROJECT=demo")
    assert out == f"env WANDB_PROJECT_ID={MASK} X.Y={MASK} WANDB_PROJECT=demo"
