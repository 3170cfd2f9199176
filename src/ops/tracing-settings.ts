/* What the configuration gives tracing: below both `config.ts`, which reads it, and `tracing.ts`, which runs it. */

/** The samplers OTEL_TRACES_SAMPLER may name: the SDK's own, each built in `ops/tracing.ts`. */
export const SAMPLERS = [
  'always_on',
  'always_off',
  'traceidratio',
  'parentbased_always_on',
  'parentbased_always_off',
  'parentbased_traceidratio',
] as const;
export type SamplerName = (typeof SAMPLERS)[number];

/** What the OTEL_* variables ask for, as `config.ts` read and checked them. */
export type TracingSettings = {
  /** An OTLP endpoint is set, and neither OTEL_SDK_DISABLED nor OTEL_TRACES_EXPORTER=none turns it off. */
  enabled: boolean;
  protocol: 'http/protobuf' | 'http/json';
  /** OTEL_TRACES_SAMPLER (unset: parentbased_always_on) and its OTEL_TRACES_SAMPLER_ARG (unset: 1). */
  sampler: SamplerName;
  ratio: number;
};
