//! The harness itself: a host binary built by cargo runs in the guest, a
//! failing guest step is reported by name, and the guest's kernel log is
//! saved. (A lab that could not fail would prove nothing.)

use lab::{GuestScript, Lab, LabError, StepStatus};

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn failing_guest_step_is_named_and_dmesg_is_saved() {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let script = GuestScript::inline(
        "harness-failure",
        ". /share/lib.sh\n\
         step rdma_up lab_rdma_up\n\
         record kernel \"$(uname -r)\"\n\
         step host_binary_runs /share/bin/selftest --list\n\
         step must_fail sh -c 'echo this step fails on purpose; exit 7'\n\
         step never_reached true\n",
    )
    // This very test binary: a dynamically linked cargo build, like our
    // servers will be.
    .binary("selftest", std::env::current_exe().expect("current exe"));
    let outcome = lab.guest(script).run().unwrap_or_else(|e| panic!("{e}"));
    let failure = outcome.failure().expect("the run must fail");
    assert_eq!(
        failure.step.as_deref(),
        Some("must_fail"),
        "{}",
        outcome.report()
    );
    assert_eq!(
        outcome.step("must_fail").unwrap().status,
        StepStatus::Failed(7)
    );
    assert_eq!(outcome.step("rdma_up").unwrap().status, StepStatus::Passed);
    assert_eq!(
        outcome.step("host_binary_runs").unwrap().status,
        StepStatus::Passed
    );
    assert!(outcome.step("never_reached").is_none());
    assert_eq!(outcome.value("kernel"), Some(lab.kernel_version()));

    let report = outcome.report();
    assert!(report.contains("step `must_fail` failed"), "{report}");
    assert!(report.contains("this step fails on purpose"), "{report}");
    // The guest ran our binary: its test list is in the guest's log.
    assert!(
        report.contains("failing_guest_step_is_named_and_dmesg_is_saved: test"),
        "{report}"
    );
    let dmesg = std::fs::read_to_string(outcome.share_file("dmesg.txt")).expect("dmesg saved");
    assert!(dmesg.contains("siw"), "dmesg lacks siw messages:\n{dmesg}");
    assert!(report.contains("guest dmesg"), "{report}");
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn occupied_hostfwd_port_is_a_clear_boot_failure() {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    // Hold the port qemu would forward; qemu then refuses to start, which
    // is a boot failure: retried once, then reported with qemu's reason.
    // (A port no other scenario forwards, so a concurrent guest cannot
    // hold it first.)
    let _held = std::net::TcpListener::bind(("127.0.0.1", 29_999)).expect("bind 29999");
    let err = lab
        .guest(GuestScript::inline(
            "harness-port-taken",
            ". /share/lib.sh\nstep ok true\n",
        ))
        .forward(29_999, 20049)
        .run()
        .expect_err("boot must fail while the hostfwd port is taken");
    let msg = err.to_string();
    assert!(
        matches!(err, LabError::BootFailed { attempts: 2, .. }),
        "{msg}"
    );
    assert!(msg.contains("29999"), "qemu's reason is missing: {msg}");
}

#[test]
#[ignore = "kernel lab: run by lab/test"]
fn hanging_step_is_killed_named_and_kernel_log_kept() {
    let lab = Lab::open().unwrap_or_else(|e| panic!("{e}"));
    let script = GuestScript::inline(
        "harness-hang",
        ". /share/lib.sh\nstep quick true\nlab_ready\nstep hangs sleep 1000\n",
    )
    .env("LAB_STEP_TIMEOUT", "2000");
    let mut guest = lab
        .guest(script)
        .timeout(std::time::Duration::from_secs(300))
        .boot()
        .unwrap_or_else(|e| panic!("{e}"));
    guest
        .wait_ready(std::time::Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("{e}"));
    // Once the endless step has begun, the harness must kill the guest (here
    // after 1 s more) and name that step.
    let results = guest.share().join("results");
    let end = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !std::fs::read_to_string(&results).is_ok_and(|r| r.contains("BEGIN hangs")) {
        assert!(
            std::time::Instant::now() < end,
            "the step `hangs` did not begin"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let outcome = guest
        .finish_within(std::time::Duration::from_secs(1))
        .unwrap_or_else(|e| panic!("{e}"));
    let failure = outcome.failure().expect("the run must fail");
    assert_eq!(
        failure.step.as_deref(),
        Some("hangs"),
        "{}",
        outcome.report()
    );
    assert!(failure.reason.contains("killed"), "{failure}");
    assert_eq!(
        outcome.step("hangs").unwrap().status,
        StepStatus::Unfinished
    );
    assert!(outcome.timed_out.is_some());
    let report = outcome.report();
    assert!(report.contains("guest dmesg (live kernel log)"), "{report}");
    let kmsg = std::fs::read_to_string(outcome.share_file("kmsg.txt")).expect("kmsg.txt");
    assert!(
        kmsg.contains("Linux version"),
        "kernel log stream lacks the boot:\n{kmsg}"
    );
}
