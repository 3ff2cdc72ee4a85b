# Loaded by the test and the benchmark (`load "db/schema.rb"` in a process that booted the app).
ActiveRecord::Schema.define(version: 1) do
  create_table :accounts, force: :cascade do |t|
    t.string :name, null: false
    t.integer :balance, null: false, default: 0
    t.timestamps
  end

  # One row per job run that committed: `job_key` names the job (its arguments), `pid` the
  # process that ran it, `attempt` which attempt it was.
  create_table :ledger_entries, force: :cascade do |t|
    t.references :account, null: false, foreign_key: true
    t.string :job_key, null: false, index: true
    t.string :job_class, null: false
    t.integer :amount, null: false
    t.integer :attempt, null: false, default: 1
    t.integer :pid, null: false
    t.datetime :created_at, null: false
  end

  # Every attempt of FlakyWorker, written outside its transaction, so that it survives a rollback.
  create_table :attempts, force: :cascade do |t|
    t.string :job_key, null: false, index: true
    t.integer :pid, null: false
    t.datetime :created_at, null: false
  end
end
