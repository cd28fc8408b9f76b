"""The local run reads like the Kubeflow UI: one line per step as it starts and ends, epochs while
training, everything else in the log file."""

import io

from tfrecord_suite.kfp.local_run import StepReporter


def test_step_reporter_turns_kfp_output_into_step_lines():
    log, lines, now = io.StringIO(), [], iter([10.0, 12.5, 20.0, 95.25])
    reporter = StepReporter(log, lines.append, clock=lambda: next(now))
    kfp_output = (
        "\x1b[96m12:00:01.000 - INFO - Executing task \x1b[96m'shard'\x1b[0m\n"
        "    {'executor_input': ... 900 lines of JSON ...}\n"
        "12:00:03.500 - INFO - Task \x1b[96m'shard'\x1b[0m finished with status "
        "\x1b[92mSUCCESS\x1b[0m\n"
        "12:00:04 - INFO - Executing task 'train'\n"
        "    Epoch 1/2\n    17/17 - 1s - accuracy: 0.9\n    Epoch 1/2\n"
        "    Epoch 2/2\n"
    )
    for chunk in (kfp_output[:37], kfp_output[37:200], kfp_output[200:]):  # any chunking
        reporter.write(chunk)
    reporter.write("12:01:00 - INFO - Task 'train' finished with status FAILURE\n")
    assert [line.split("] ", 1)[1] for line in lines] == [
        "shard: started",
        "shard: success in 2.5 s",
        "train: started",
        "train: epoch 1/2",
        "train: epoch 2/2",
        "train: failure in 75.2 s",
    ]
    assert reporter.steps == [
        {"step": "shard", "status": "success", "seconds": 2.5},
        {"step": "train", "status": "failure", "seconds": 75.2},
    ]
    assert "900 lines of JSON" in log.getvalue()  # kept in the log, not on the terminal
